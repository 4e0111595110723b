package injector

import (
	"math/big"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	for s, want := range map[string]string{
		"1": "1", "100m": "1/10", "0.5": "1/2", ".5": "1/2", "1.": "1", "64Mi": "67108864", "1Gi": "1073741824",
		"1k": "1000", "2M": "2000000", "1e3": "1000", "1E-3": "1/1000", "+2": "2", "-1": "-1", "500u": "1/2000", "7n": "7/1000000000",
		"1Ei": "1152921504606846976",
	} {
		q, err := parseQuantity(s)
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		w, _ := new(big.Rat).SetString(want)
		if q.Cmp(w) != 0 {
			t.Errorf("%q = %v, want %v", s, q, w)
		}
	}
	for _, s := range []string{"", "m", "Mi", "1 Mi", "1mi", "1KB", "0x10", "1e", "1e999", "1.2.3", "--1", "1Mi ", "lots", "1e3Mi"} {
		if q, err := parseQuantity(s); err == nil {
			t.Errorf("%q accepted as %v", s, q)
		}
	}
}
