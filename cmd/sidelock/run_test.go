package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/sidecartest"
)

// runSecret is the password in the bad entries: distinctive, so a leak is
// unmistakable.
const runSecret = "S3cr3t-u9Kf"

// run stops at start-up with one message naming every bad setting.
func TestRunRejectsBadConfigWithOneMessage(t *testing.T) {
	t.Setenv("SIDELOCK_REDIS_ADDRS", "")
	t.Setenv("SIDELOCK_KEY_TTL", "2h")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"sidelock"}, os.Getenv, &bytes.Buffer{}, &stderr)
	if err == nil {
		t.Fatal("started with no masters")
	}
	for _, want := range []string{"SIDELOCK_REDIS_ADDRS is empty", "SIDELOCK_KEY_TTL 2h0m0s must not exceed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Setenv("SIDELOCK_KEY_TTL", "soon")
	if err := run(context.Background(), []string{"sidelock"}, os.Getenv, &bytes.Buffer{}, &stderr); err == nil || !strings.Contains(err.Error(), "KEY_TTL") {
		t.Fatalf("unparsable duration: %v", err)
	}
}

// Dev mode works with nothing installed and prints a curl quick start.
func TestRunDevModeServesAndStops(t *testing.T) {
	api, admin := sidecartest.FreeAddr(t), sidecartest.FreeAddr(t)
	t.Setenv("SIDELOCK_LISTEN_ADDR", api)
	t.Setenv("SIDELOCK_ADMIN_ADDR", admin)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sidelock", "-dev"}, func(string) string { return "" }, &stdout, &stderr)
	}()
	eventually(t, 5*time.Second, "dev mode ready", func() bool {
		res, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	})
	res, err := http.Post("http://"+api+"/locks/demo?ttl=30s", "", nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("acquire in dev mode: %v %v", res, err)
	}
	res.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(stdout.String(), "curl -s -X POST 'http://"+api+"/locks/demo?ttl=30s'") {
		t.Fatalf("no quick start on stdout: %q", stdout.String())
	}
}

func TestRunVersionAndUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sidelock", "-version"}, os.Getenv, &out, &out); err != nil || !strings.Contains(out.String(), "sidelock") {
		t.Fatalf("-version: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"sidelock", "frobnicate"}, os.Getenv, &out, &out); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// A bad master entry stops start-up with a message that names the entry
// by its place and shows no part of it: checked through run, with the
// environment a deployment would set, for each of the three lists.
func TestRunRefusesABadMasterWithoutShowingIt(t *testing.T) {
	for _, env := range []map[string]string{
		{"SIDELOCK_REDIS_ADDRS": "127.0.0.1:16380," + runSecret + "@127.0.0.1:16382,127.0.0.1:16384"},
		{"SIDELOCK_REDIS_ADDRS": "redis://:" + runSecret + "@127.0.0.1:16380/2,127.0.0.1:16382,127.0.0.1:16384"},
		{"SIDELOCK_REDIS_GROUPS": "g=127.0.0.1:16380," + runSecret + "@127.0.0.1:16382,127.0.0.1:16384"},
		{"SIDELOCK_REDIS_GROUPS": "g=127.0.0.1:16380,127.0.0.1:16382,127.0.0.1:16384",
			"SIDELOCK_REDIS_GROUPS_PREVIOUS": "g=127.0.0.1:16380,redis://:" + runSecret + "@127.0.0.1:16382?db=0,127.0.0.1:16384"},
	} {
		t.Setenv("SIDELOCK_REDIS_ADDRS", "")
		t.Setenv("SIDELOCK_REDIS_GROUPS", "")
		t.Setenv("SIDELOCK_REDIS_GROUPS_PREVIOUS", "")
		t.Setenv("SIDELOCK_LISTEN_ADDR", sidecartest.FreeAddr(t))
		t.Setenv("SIDELOCK_ADMIN_ADDR", sidecartest.FreeAddr(t))
		t.Setenv("SIDELOCK_LOG_LEVEL", "debug")
		for k, v := range env {
			t.Setenv(k, v)
		}
		// Bounded: were the entry accepted, run would serve until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var stderr bytes.Buffer
		err := run(ctx, []string{"sidelock"}, os.Getenv, &bytes.Buffer{}, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "is not host:port or redis") {
			t.Errorf("%v: started, or refused for another reason: %v", env, err)
		}
		if err != nil && strings.Contains(err.Error()+stderr.String(), runSecret) {
			t.Errorf("%v: the refusal shows the password:\n%v\n%s", env, err, stderr.String())
		}
	}
}
