# Publishing a release that make release built and checked into $(DIST) (.github/workflows/release.yml
# runs these on a tag; a maintainer can too, with the same credentials in the environment). None of
# it can run here: it needs github.com, ghcr.io, PyPI and npm.

REGISTRY ?= ghcr.io/sidelock
CHART_REPO ?= oci://$(REGISTRY)/charts
CRANE_VERSION ?= v0.22.1
CRANE = $(GO) run github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)
# twine uploads to PyPI; pip installs it where the index is reachable (a GitHub runner).
TWINE_VERSION ?= 6.1.0

.PHONY: publish publish-check publish-image publish-chart publish-github publish-pypi publish-npm

## publish: push dist/ (make release VERSION=vX.Y.Z first): the image and the chart to ghcr.io, the
## files to the GitHub release vX.Y.Z, the Python package to PyPI, the Node one to npm. Credentials
## from the environment: REGISTRY_USER/REGISTRY_PASSWORD, GH_TOKEN, TWINE_USERNAME/TWINE_PASSWORD,
## NODE_AUTH_TOKEN.
publish: publish-check publish-image publish-chart publish-github publish-pypi publish-npm

# publish-check: only a release whose version is the tree's VERSION (so the docs and the copies in
# the tree say what is published), and only a checked dist/.
publish-check:
	@test "$(VERSION)" = "$$(cat VERSION)" || { echo "VERSION=$(VERSION) is not the tree's VERSION $$(cat VERSION): make version VERSION=$(VERSION) and commit first" >&2; exit 1; }
	$(MAKE) --no-print-directory release-verify

publish-image: publish-check
	$(CRANE) auth login ghcr.io -u "$$REGISTRY_USER" -p "$$REGISTRY_PASSWORD"
	$(CRANE) push $(DIST)/oci $(REGISTRY)/sidelock:$(VERSION)

publish-chart: publish-check
	echo "$$REGISTRY_PASSWORD" | $(HELM) registry login ghcr.io -u "$$REGISTRY_USER" --password-stdin
	$(HELM) push $(DIST)/$(CHART_TGZ) $(CHART_REPO)

publish-github: publish-check
	cd $(DIST) && gh release create $(VERSION) --title $(VERSION) --notes "See CHANGELOG.md for $(VERSION)." \
		sidelock_$(VERSION)_*.tar.gz sidelock_$(VERSION)_image_*.tar $(CHART_TGZ) $(PY_SDIST) $(PY_WHEEL) $(NPM_TGZ) SHA256SUMS

publish-pypi: publish-check
	python3 -m pip install --user --quiet twine==$(TWINE_VERSION)
	python3 -m twine upload --non-interactive $(DIST)/$(PY_SDIST) $(DIST)/$(PY_WHEEL)

publish-npm: publish-check
	npm config set //registry.npmjs.org/:_authToken '$${NODE_AUTH_TOKEN}'
	npm publish --access public $(DIST)/$(NPM_TGZ)
