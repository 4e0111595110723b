package main

import (
	"github.com/sidelock/sidelock/internal/config"

	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lmittmann/tint"

	"github.com/sidelock/sidelock/internal/injector"
	assembly "github.com/sidelock/sidelock/internal/sidecar"
)

// injectorOptions are the settings of `sidelock injector`: flags, each
// defaulting to a SIDELOCK_INJECTOR_* variable (the chart sets those).
type injectorOptions struct {
	listen, certFile, keyFile, specFile string
	exclude                             string
	logFormat, logLevel                 string
	shutdownDelay                       time.Duration
}

// injectorShutdownTimeout bounds the wait for calls in flight once the
// injector stops listening.
const injectorShutdownTimeout = 10 * time.Second

func parseInjector(args []string, getenv func(string) string, stdout io.Writer) (injectorOptions, error) {
	var o injectorOptions
	env := func(name, def string) string {
		if v := getenv("SIDELOCK_INJECTOR_" + name); v != "" {
			return v
		}
		return def
	}
	delay, err := time.ParseDuration(env("SHUTDOWN_DELAY", "5s"))
	if err != nil {
		return o, fmt.Errorf("SIDELOCK_INJECTOR_SHUTDOWN_DELAY: %w", err)
	}
	fs := newFlags("injector")
	fs.StringVar(&o.listen, "listen", env("LISTEN_ADDR", ":8443"), "HTTPS address of the webhook (/mutate) and its probes (/healthz, /readyz) [SIDELOCK_INJECTOR_LISTEN_ADDR]")
	fs.StringVar(&o.certFile, "tls-cert", env("TLS_CERT_FILE", ""), "PEM serving certificate, reloaded when it changes [SIDELOCK_INJECTOR_TLS_CERT_FILE]")
	fs.StringVar(&o.keyFile, "tls-key", env("TLS_KEY_FILE", ""), "PEM key of the serving certificate [SIDELOCK_INJECTOR_TLS_KEY_FILE]")
	fs.StringVar(&o.specFile, "sidecar-spec", env("SIDECAR_SPEC", ""), "JSON sidecar spec rendered by the Helm chart (its sidelock.sidecar template) [SIDELOCK_INJECTOR_SIDECAR_SPEC]")
	fs.StringVar(&o.exclude, "exclude-namespaces", env("EXCLUDE_NAMESPACES", ""), "comma-separated namespaces never injected, besides kube-system [SIDELOCK_INJECTOR_EXCLUDE_NAMESPACES]")
	fs.StringVar(&o.logFormat, "log-format", env("LOG_FORMAT", "text"), "text or json [SIDELOCK_INJECTOR_LOG_FORMAT]")
	fs.StringVar(&o.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error [SIDELOCK_INJECTOR_LOG_LEVEL]")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", delay, "on SIGTERM, keep answering (and fail /readyz) this long, while the Service drops the pod [SIDELOCK_INJECTOR_SHUTDOWN_DELAY]")
	if err := parseFlags(fs, "injector", args, stdout); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageError("injector", "injector takes no arguments, got %q", fs.Args())
	}
	var errs []error
	if o.certFile == "" || o.keyFile == "" {
		errs = append(errs, errors.New("-tls-cert and -tls-key are required (the API server only calls webhooks over HTTPS)"))
	}
	if o.specFile == "" {
		errs = append(errs, errors.New("-sidecar-spec is required (the chart's rendering of the sidelock.sidecar template)"))
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		errs = append(errs, fmt.Errorf("-listen %q is not host:port", o.listen))
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		errs = append(errs, fmt.Errorf("-log-format must be text or json, not %q", o.logFormat))
	}
	if _, err := config.ParseLevel(o.logLevel); err != nil {
		errs = append(errs, fmt.Errorf("-log-level: %w", err))
	}
	if o.shutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("-shutdown-delay %v is negative", o.shutdownDelay))
	}
	if err := errors.Join(errs...); err != nil {
		return o, usageError("injector", "%v", err)
	}
	return o, nil
}

// runInjector is `sidelock injector`: the sidecar injector's webhook
// server, until ctx ends.
func runInjector(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseInjector(args, getenv, stdout) // then everything goes to the log
	if err != nil {
		return err
	}
	level, _ := config.ParseLevel(o.logLevel)
	var log *slog.Logger
	if o.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	} else {
		log = slog.New(tint.NewTextHandler(stderr, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !colourful(stderr, getenv)}))
	}

	spec, err := injector.LoadSpec(o.specFile)
	if err != nil {
		return err
	}
	inj, err := injector.New(injector.Config{Spec: spec, ExcludeNamespaces: strings.Split(o.exclude, ","), Logger: log})
	if err != nil {
		return err
	}
	certs, err := injector.NewCertReloader(o.certFile, o.keyFile, injector.CertCheckInterval, log)
	if err != nil {
		return err
	}

	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.Handle("POST /mutate", inj)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := assembly.NewHTTPServer(mux, log) // the sidecar's timeouts
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("injector listener: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	log.Info("sidelock injector started", "version", version, "addr", ln.Addr().String(),
		"container", spec.ContainerName(), "label", injector.InjectLabel, "exclude", o.exclude)

	select {
	case err := <-serveErr:
		return fmt.Errorf("injector listener: %w", err)
	case <-ctx.Done():
	}
	// The API server keeps calling this pod until its endpoint is gone:
	// answer meanwhile (opted-in pods would fail to be created otherwise),
	// and tell the kubelet we are going.
	draining.Store(true)
	log.Info("stopping: still answering while the Service drops this pod", "delay", o.shutdownDelay)
	select {
	case <-time.After(o.shutdownDelay):
	case err := <-serveErr:
		return fmt.Errorf("injector listener: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), injectorShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("injector shutdown: %w", err)
	}
	log.Info("injector stopped")
	return nil
}
