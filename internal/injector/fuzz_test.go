package injector_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/sidelock/sidelock/internal/injector"
)

// FuzzDecodeReview feeds arbitrary bodies to the decoder and the handler:
// never a panic; a body is either refused as malformed (400) or answered
// with a review echoing its uid, whose patch, if any, applies to the pod.
func FuzzDecodeReview(f *testing.F) {
	doc := podJSON(optIn, map[string]string{"sidelock.io/max-ttl": "2h", "sidelock.io/fencing": "x"}, `,"initContainers":[{"name":"a"}],"volumes":null`)
	for _, seed := range []string{
		string(reviewBody(f, request("u", "shop", "CREATE", podJSON(optIn, nil, "")))),
		string(reviewBody(f, request("u", "shop", "CREATE", doc))),
		string(reviewBody(f, request("u", "kube-system", "CREATE", podJSON(optIn, nil, "")))),
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod"},"resource":{"resource":"pods"},"operation":"CREATE","object":{"metadata":{"labels":{"sidelock.io/inject":"true"},"annotations":null},"spec":{"initContainers":null}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":[]}}`,
		`{}`, `null`, `[`, "",
	} {
		f.Add([]byte(seed))
	}
	inj, err := injector.New(injector.Config{Spec: loadSpec(f)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		review, decodeErr := injector.DecodeReview(body)
		out, status := inj.Handle(body)
		if decodeErr != nil {
			if !errors.Is(decodeErr, injector.ErrMalformed) || status != http.StatusBadRequest {
				t.Fatalf("decode error %v, status %d", decodeErr, status)
			}
			return
		}
		if status != http.StatusOK {
			t.Fatalf("status %d for a decodable review: %s", status, out)
		}
		var answer injector.AdmissionReview
		if err := json.Unmarshal(out, &answer); err != nil || answer.Response == nil {
			t.Fatalf("answer %s: %v", out, err)
		}
		resp := answer.Response
		if resp.UID != review.Request.UID {
			t.Fatalf("uid %q, want %q", resp.UID, review.Request.UID)
		}
		if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
			t.Fatal("denied without a reason")
		}
		if resp.Patch != nil {
			if _, err := applyPatch(review.Request.Object, resp.Patch); err != nil {
				t.Fatalf("patch does not apply: %v\nobject %s\npatch %s", err, review.Request.Object, resp.Patch)
			}
		}
	})
}
