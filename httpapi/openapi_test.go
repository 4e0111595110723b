package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

type openAPIDoc struct {
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

// The OpenAPI description lists exactly the routes and methods the two
// routers serve (the lock API's and the admin listener's): a route added
// or removed without the spec fails here.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	lockAPI, admin := chi.NewRouter(), chi.NewRouter()
	addLockRoutes(lockAPI, log, nil, nil, nil, options{})
	addAdminRoutes(admin, log, nil, http.NotFoundHandler())
	var served []string
	for _, r := range []chi.Router{lockAPI, admin} {
		err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			served = append(served, strings.ToLower(method)+" "+strings.Replace(route, "/*", "/"+pathParam(route), 1))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" && method != "servers" {
				documented = append(documented, method+" "+path)
			}
		}
	}
	// GET /locks/*, /semaphores/*, /rwlocks/* and /locksets/* also serve
	// the event stream by its reserved suffix.
	served = append(served, "get /locks/{name}/events", "get /semaphores/{name}/events", "get /rwlocks/{name}/events", "get /locksets/{names}/events")
	slices.Sort(served)
	slices.Sort(documented)
	if !slices.Equal(served, documented) {
		t.Fatalf("routes and OpenAPI differ:\nserved:     %v\ndocumented: %v", served, documented)
	}
}

// pathParam is the spec's parameter for the rest of a route's path: a
// lock set's names, or one name.
func pathParam(route string) string {
	if strings.HasPrefix(route, locksets) {
		return "{names}"
	}
	return "{name}"
}
