package lease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A value out of range is refused as a ParamError naming the parameter,
// and it stays ErrInvalid for every caller that only asks errors.Is.
func TestOutOfRangeValuesNameTheirParameter(t *testing.T) {
	m := &Manager{cfg: Config{DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute, MaxHold: time.Hour}}
	for _, c := range []struct {
		req   Request
		param string
	}{
		{Request{Name: "x", TTL: 500 * time.Millisecond}, ParamTTL},
		{Request{Name: "x", TTL: 2 * time.Hour}, ParamTTL},
		{Request{Name: "x", Wait: 2 * time.Minute}, ParamWait},
		{Request{Name: "x", Wait: -time.Second}, ParamWait},
		{Request{Name: "x", MaxHold: 2 * time.Hour}, ParamMaxHold},
		{Request{Name: "x", Owner: strings.Repeat("o", MaxOwnerLen+1)}, ParamOwner},
		{Request{Name: "x", Owner: "a\u202eb"}, ParamOwner},
	} {
		_, err := m.normalize(c.req)
		var param *ParamError
		if !errors.As(err, &param) || param.Param != c.param || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want a ParamError for %s that is ErrInvalid", c.req, err, c.param)
		}
		if !strings.HasPrefix(err.Error(), "invalid request: ") {
			t.Errorf("%+v: message %q", c.req, err)
		}
	}
	if err := m.checkTTL(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("checkTTL(0): %v", err)
	}
	if _, err := m.normalize(Request{Name: "x#1"}); err == nil || errors.As(err, new(*ParamError)) {
		t.Errorf("a bad name is not a parameter's refusal (the edge answers invalid_name): %v", err)
	}
}
