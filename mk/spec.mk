# The spec harness (issue 16, findings 2-4; issue 31, point 4), test/spec: httpapi/openapi.json
# checked with tools nobody here wrote. Spectral lints it (test/spec/js/.spectral.yaml), and Redocly
# (redocly.yaml at the root: 0 errors, no unused component); openapi-typescript generates a client's
# types, tsc checks the npm tests against them and compiles a TypeScript program typed against them
# (typed.test.mts: acquire, token, fence, release, no casts); the Go test (its own module, so
# kin-openapi stays out of the product's go.mod) builds cmd/sidelock, starts 3 real masters and the
# sidecar, validates every answer against the spec, requires every documented answer to be seen,
# and runs the npm tests (openapi-fetch, eventsource) through a checking proxy.

SPEC_JS := test/spec/js
# npm's own record of what it installed: newer than package-lock.json while node_modules matches it.
SPEC_NPM_STAMP := $(SPEC_JS)/node_modules/.package-lock.json

.PHONY: spec-test spec-lint spec-types spec-tools

## spec-test: lint httpapi/openapi.json (Spectral), type-check the npm tests against a client
## generated from it, then validate every answer of the real sidecar against it and require each
## documented answer to be seen, with the generated client and the eventsource client (~45 s warm).
spec-test: redis-server spec-lint spec-types
	cd test/spec && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

## spec-lint: Spectral (spectral:oas, all rules, and sidelock's own) and Redocly (recommended, no
## unused component) over httpapi/openapi.json; fails on any error, prints warnings.
spec-lint: $(SPEC_NPM_STAMP)
	cd $(SPEC_JS) && npm run --silent lint && npm run --silent redocly

# spec-types generates the client's types from the spec (git-ignored js/gen/), checks the npm tests
# against them with tsc, and compiles typed.test.mts (strict, skipLibCheck off) into js/gen/.
spec-types: $(SPEC_NPM_STAMP)
	cd $(SPEC_JS) && npm run --silent gen && npm run --silent typecheck

# npm ci runs only when package-lock.json changed since the last install (node_modules is
# git-ignored and kept); install scripts are off (the tree needs none; one would phone home).
$(SPEC_NPM_STAMP): $(SPEC_JS)/package-lock.json | spec-tools
	cd $(SPEC_JS) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# spec-tools installs Debian's nodejs (Node 18 on bookworm) and npm when missing.
spec-tools:
	$(call need-deb,node,nodejs)
	$(call need-deb,npm,npm)

TEST_MORE += spec-test
TEST_TOOLS += $(SPEC_NPM_STAMP)
