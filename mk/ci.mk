# The GitHub workflows (.github/workflows), which only call make targets: actionlint (from the Go
# module proxy) checks their syntax, expressions and runner labels in make test.

ACTIONLINT_VERSION ?= v1.7.12
ACTIONLINT = $(GO) run github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

.PHONY: workflow-lint

## workflow-lint: actionlint over .github/workflows (~5 s once built).
workflow-lint:
	$(ACTIONLINT) -color .github/workflows/*.yml

TEST_MORE += workflow-lint
