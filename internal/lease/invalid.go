package lease

import (
	"errors"
	"fmt"
)

// Parameters a request can be refused for on its own, named as the HTTP
// API names them (the edge answers a code per parameter: invalid_ttl...).
const (
	ParamTTL     = "ttl"
	ParamWait    = "wait"
	ParamMaxHold = "max_hold"
	ParamOwner   = "owner"
	ParamPermits = "permits"
	ParamMode    = "mode"
)

// ParamError is a request refused for the value of one parameter (out of
// range, or not allowed in a label). It is also ErrInvalid: callers that
// only ask whether a request was invalid match it with errors.Is as
// before, and those that can say which parameter was wrong use errors.As.
type ParamError struct {
	Param string // one of the Param constants
	Err   error  // the reason, itself ErrInvalid
}

func (e *ParamError) Error() string { return e.Err.Error() }

func (e *ParamError) Unwrap() error { return e.Err }

// invalidParam refuses param for the reason format says; the message
// reads "invalid request: <reason>", as every ErrInvalid does.
func invalidParam(param, format string, args ...any) error {
	return &ParamError{Param: param, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))}
}

// asParamError marks err, a refusal of param's value, as a ParamError
// (nil stays nil; an err that is not ErrInvalid is returned as it is).
func asParamError(param string, err error) error {
	if err == nil || !errors.Is(err, ErrInvalid) {
		return err
	}
	return &ParamError{Param: param, Err: err}
}
