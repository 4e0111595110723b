# The official clients (clients/python, clients/node; docs/clients.md), tested against a real sidecar
# (issue 16). Their Go harness, clients/clients_test.go, builds cmd/sidelock, starts three real
# redis-server masters and the sidecar, then runs `python3 -m unittest`, `node --test` and every
# snippet of docs/clients.md. Without python3 or node it skips, unless SIDELOCK_CLIENTS_REQUIRED=1.

# test/clients holds the tools nobody here wrote that the clients are checked with: TypeScript (tsc
# --strict on a consumer of the Node client's index.d.ts, skipLibCheck off) and undici (the baseline
# of make bench-clients), pinned in its package-lock.json.
CLIENTS_JS := test/clients
# npm's own record of what it installed: newer than package-lock.json while node_modules matches it.
CLIENTS_NPM_STAMP := $(CLIENTS_JS)/node_modules/.package-lock.json
# The Node client's own dependency (undici), from its package-lock.json.
NODE_CLIENT_STAMP := clients/node/node_modules/.package-lock.json

.PHONY: clients-test clients-tools clients-types bench-clients

## clients-test: the Python and Node clients' tests and docs/clients.md's snippets against a real
## sidecar over 3 real masters (~35 s), and the Node client's types under tsc --strict; fails if
## python3 or node is missing (installed when not).
clients-test: redis-server clients-tools clients-types $(NODE_CLIENT_STAMP)
	set -o pipefail; SIDELOCK_CLIENTS_REQUIRED=1 $(GO) test -count=1 -timeout 10m -v ./clients 2>&1 | \
	  grep -vE '^\s*(=== RUN|--- PASS)|redis-server .* log tail|^\s+[0-9]+:[CM] '

# clients-types: a TypeScript consumer of clients/node/index.d.ts, with and without @types/node.
clients-types: $(CLIENTS_NPM_STAMP)
	cd $(CLIENTS_JS) && npm run --silent typecheck

## bench-clients: the clients' cost against a real sidecar over 3 real masters (~4 min, not in make
## test): the Node client's CPU per lock and pairs/s beside a bare undici Pool, the global fetch and
## the client before it pooled; the Python clients' p50 per lock before and after. Wrap it in flock
## on a shared machine (docs/clients.md#performance).
bench-clients: redis-server clients-tools $(CLIENTS_NPM_STAMP) $(NODE_CLIENT_STAMP)
	set -o pipefail; SIDELOCK_CLIENTS_BENCH=1 $(GO) test -count=1 -timeout 20m -v -run '^TestClientBench$$' ./clients 2>&1 | \
	  grep -vE '^\s*(=== RUN|--- PASS)|redis-server .* log tail|^\s+[0-9]+:[CM] '

$(CLIENTS_NPM_STAMP): $(CLIENTS_JS)/package-lock.json | clients-tools
	cd $(CLIENTS_JS) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

$(NODE_CLIENT_STAMP): clients/node/package-lock.json | clients-tools
	cd clients/node && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# clients-tools installs Debian's python3, nodejs (Node 18 on bookworm), npm and curl
# (examples/leader.sh) when missing.
clients-tools:
	$(call need-deb,python3,python3)
	$(call need-deb,node,nodejs)
	$(call need-deb,npm,npm)
	$(call need-deb,curl,curl)

TEST_MORE += clients-test
TEST_TOOLS += clients-tools
