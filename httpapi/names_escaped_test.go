package httpapi_test

import (
	"testing"
)

// OpenAPI-generated clients escape a path parameter's '/' as %2F. Such a
// name is the same lock as the one written with '/', decoded once: a
// second level of escaping, escaped dot segments and malformed escapes are
// refused as invalid names, never taken for another lock.
func TestEscapedSlashInANameIsTheSameLock(t *testing.T) {
	srv := newAPI(t)
	got := call(t, srv, "POST", "/locks/orders%2F42?ttl=30s", "")
	if got.status != 200 || got.body["name"] != "orders/42" {
		t.Fatalf("POST /locks/orders%%2F42: %d %v, want 200 for the lock orders/42", got.status, got.raw)
	}
	token, _ := got.body["token"].(string)
	if held := call(t, srv, "POST", "/locks/orders/42", ""); held.status != 409 {
		t.Fatalf("POST /locks/orders/42 while orders%%2F42 is held: %d, want 409 (the same lock)", held.status)
	}
	if st := call(t, srv, "GET", "/locks/orders%2f42", ""); st.status != 200 || st.body["held"] != true {
		t.Fatalf("GET /locks/orders%%2f42: %d %v, want held", st.status, st.raw)
	}
	if ext := call(t, srv, "PUT", "/locks/orders/42", "", "Lock-Token", token); ext.status != 200 {
		t.Fatalf("PUT /locks/orders/42 with the token: %d %v", ext.status, ext.raw)
	}
	if rel := call(t, srv, "DELETE", "/locks/orders%2F42", "", "Lock-Token", token); rel.status != 204 {
		t.Fatalf("DELETE /locks/orders%%2F42 with the token: %d %v", rel.status, rel.raw)
	}

	for _, path := range []string{
		"/locks/orders%252F42",   // escaped twice: '%' is not a name byte
		"/locks/orders%2F%2E%2E", // an escaped ".." segment
		"/locks/orders%2F%2F42",  // an escaped empty segment
		"/locks/orders%2Fevents", // an escaped '/' does not make an event stream name legal
		"/locks/orders%2Fx%20y",  // a space
	} {
		if got := call(t, srv, "POST", path, ""); got.status != 400 || got.body["code"] != "invalid_name" {
			t.Errorf("POST %s: %d %v, want 400 invalid_name", path, got.status, got.raw)
		}
	}
}
