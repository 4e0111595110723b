# The official clients (clients/python, clients/node; docs/clients.md), tested against a real sidecar
# (issue 16). Their Go harness, clients/clients_test.go, builds cmd/sidelock, starts three real
# redis-server masters and the sidecar, then runs `python3 -m unittest`, `node --test` and every
# snippet of docs/clients.md. Without python3 or node it skips, unless SIDELOCK_CLIENTS_REQUIRED=1.

.PHONY: clients-test clients-tools

## clients-test: the Python and Node clients' tests and docs/clients.md's snippets against a real
## sidecar over 3 real masters (~35 s), failing if python3 or node is missing (installed when not).
clients-test: redis-server clients-tools
	set -o pipefail; SIDELOCK_CLIENTS_REQUIRED=1 $(GO) test -count=1 -timeout 10m -v ./clients 2>&1 | \
	  grep -vE '^\s*(=== RUN|--- PASS)|redis-server .* log tail|^\s+[0-9]+:[CM] '

# clients-tools installs Debian's python3, nodejs (Node 18 on bookworm) and curl (examples/leader.sh)
# when missing.
clients-tools:
	$(call need-deb,python3,python3)
	$(call need-deb,node,nodejs)
	$(call need-deb,curl,curl)

TEST_MORE += clients-test
TEST_TOOLS += clients-tools
