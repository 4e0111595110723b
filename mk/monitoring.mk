# Monitoring that ships with the chart: the alert rules in
# charts/sidelock/files/alerts.yaml (the file the PrometheusRule renders)
# and their promtool unit tests (alerts_test.yaml next to it).
ALERTS := charts/sidelock/files/alerts.yaml
ALERT_TESTS := charts/sidelock/files/alerts_test.yaml

.PHONY: monitoring-test promtool

## monitoring-test: promtool check rules and promtool test rules on the chart's alerts (<1 s once
## promtool is installed; the rules' series and runbooks are checked by test-deploy).
monitoring-test: promtool
	promtool check rules $(ALERTS)
	promtool test rules $(ALERT_TESTS)

TEST_MORE += monitoring-test
TEST_TOOLS += promtool

# promtool: Debian's prometheus package ships it (bookworm: 2.42, ~7 s to install). Building it from
# the module proxy instead takes minutes on 2 cores (the prometheus module and its dependencies).
# On a host running systemd, the package also enables a Prometheus server.
promtool:
	$(call need-deb,promtool,prometheus)
