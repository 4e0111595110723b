package httpapi

import (
	"net/http"
)

// handleHealthz says the process serves HTTP. It never asks Redis:
// restarting the sidecar cannot fix Redis and would drop held locks.
func handleHealthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// handleReadyz is 200 while the last health round found a quorum of
// masters, 503 otherwise; the body lists every master's state.
func handleReadyz(ready Readiness) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		report := ready.Report()
		status := http.StatusOK
		if !report.Ready {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, report)
	})
}
