package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/sidelock/sidelock/pkg/health"
	"github.com/sidelock/sidelock/pkg/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/shard"
)

// groupSpec is one quorum group as configured: a name and its masters.
type groupSpec struct {
	Name    string
	Masters []masterAddr
}

// addrs are the group's masters by host:port, the only name they go by.
func (g groupSpec) addrs() []string { return hostPorts(g.Masters) }

var groupNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// parseGroups reads "a1:6379,a2:6379,a3:6379;b1:6379,..." where a group may
// be named "east=a1:6379,..." and a master may be a redis:// URL (see
// parseMaster). An unnamed group is named after its masters' host:port
// (sorted and joined with commas), so reordering them, or moving their
// credentials into URLs, moves no lock names; naming groups lets a master
// be replaced without moving any.
func parseGroups(s string) ([]groupSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var groups []groupSpec
	var errs []error
	for i, part := range strings.Split(s, ";") {
		g, err := parseGroup(part)
		if err != nil {
			errs = append(errs, fmt.Errorf("group %d: %w", i+1, err))
			continue
		}
		groups = append(groups, g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return groups, checkGroupSpecs(groups)
}

func parseGroup(s string) (groupSpec, error) {
	var g groupSpec
	if name, masters, named := cutGroupName(s); named {
		g.Name = strings.TrimSpace(name)
		if !groupNamePattern.MatchString(g.Name) {
			// Not quoted: a mistyped master may have put its password here.
			return g, errors.New("the text before '=' is not a group name: use 1-64 letters, digits, '_', '.' or '-'")
		}
		s = masters
	}
	masters, err := parseMasters(strings.Split(s, ","))
	if err != nil {
		return g, err
	}
	g.Masters = masters
	if g.Name == "" {
		g.Name = defaultGroupName(g.addrs())
	}
	return g, nil
}

// cutGroupName splits "name=masters". An '=' after a "://" belongs to a
// URL's password, so a group whose first master is such a URL is unnamed.
func cutGroupName(s string) (name, masters string, named bool) {
	name, masters, named = strings.Cut(s, "=")
	if !named || strings.Contains(name, "://") {
		return "", s, false
	}
	return name, masters, true
}

func defaultGroupName(addrs []string) string {
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	return strings.Join(sorted, ",")
}

// checkGroupSpecs refuses a list in which a name or a master appears
// twice: the groups must be independent of each other too.
func checkGroupSpecs(groups []groupSpec) error {
	names := map[string]bool{}
	owner := map[string]string{}
	var errs []error
	for _, g := range groups {
		if names[g.Name] {
			errs = append(errs, fmt.Errorf("two groups are named %q", g.Name))
		}
		names[g.Name] = true
		for _, a := range g.addrs() {
			key := strings.ToLower(a) // host names are case-insensitive
			if o, ok := owner[key]; ok {
				errs = append(errs, fmt.Errorf("master %q is listed twice (groups %q and %q): masters must be independent", a, o, g.Name))
			}
			owner[key] = g.Name
		}
	}
	return errors.Join(errs...)
}

// checkMigration refuses previous groups that contradict the current ones:
// a group name must mean the same masters in both lists, and a master may
// belong to one group only.
func checkMigration(current, previous []groupSpec) error {
	var errs []error
	byName := map[string]groupSpec{}
	owner := map[string]string{}
	for _, g := range current {
		byName[g.Name] = g
		for _, a := range g.addrs() {
			owner[a] = g.Name
		}
	}
	for _, p := range previous {
		if c, ok := byName[p.Name]; ok && defaultGroupName(c.addrs()) != defaultGroupName(p.addrs()) {
			errs = append(errs, fmt.Errorf("group %q has different masters in the two lists", p.Name))
		}
		for _, a := range p.addrs() {
			if o, ok := owner[a]; ok && o != p.Name {
				errs = append(errs, fmt.Errorf("master %q is in group %q now and in group %q before", a, o, p.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// unionGroups is every group the sidecar must talk to: the current ones,
// then those only in the previous list (names leaving them are held there
// too while the migration lasts).
func unionGroups(current, previous []groupSpec) []groupSpec {
	all := slices.Clone(current)
	for _, p := range previous {
		if !slices.ContainsFunc(current, func(c groupSpec) bool { return c.Name == p.Name }) {
			all = append(all, p)
		}
	}
	return all
}

// groups returns the quorum groups to lock in, and during a migration the
// list before it (nil otherwise). SIDELOCK_REDIS_ADDRS is one group.
func (c config) groups() (current, previous []groupSpec, err error) {
	current, err = parseGroups(c.RedisGroups)
	if err != nil {
		return nil, nil, fmt.Errorf("SIDELOCK_REDIS_GROUPS: %w", err)
	}
	if len(current) == 0 {
		masters, err := parseMasters(c.RedisAddrs)
		if err != nil {
			return nil, nil, fmt.Errorf("SIDELOCK_REDIS_ADDRS: %w", err)
		}
		current = []groupSpec{{Name: defaultGroupName(hostPorts(masters)), Masters: masters}}
	}
	previous, err = parseGroups(c.RedisGroupsPrev)
	if err != nil {
		return nil, nil, fmt.Errorf("SIDELOCK_REDIS_GROUPS_PREVIOUS: %w", err)
	}
	if err := checkMigration(current, previous); err != nil {
		return nil, nil, fmt.Errorf("SIDELOCK_REDIS_GROUPS_PREVIOUS contradicts the current groups: %w", err)
	}
	return current, previous, nil
}

func (c config) validateGroups() []error {
	var errs []error
	if c.ReadyPolicy != "all" && c.ReadyPolicy != "any" {
		errs = append(errs, fmt.Errorf("SIDELOCK_READY_POLICY must be all or any, not %q", c.ReadyPolicy))
	}
	if c.Dev {
		return errs
	}
	current, previous, err := c.groups()
	if err != nil {
		return append(errs, err)
	}
	// Every entry written is checked, even a previous group's that the
	// current group of its name stands in for.
	var masters []masterAddr
	for _, g := range slices.Concat(current, previous) {
		masters = append(masters, g.Masters...)
	}
	return append(errs, c.checkMasterSettings(masters)...)
}

// quorumGroup is a group's masters and the Locker over them.
type quorumGroup struct {
	name   string
	addrs  []string // host:port (the nodes' names in dev mode)
	nodes  []redlock.Node
	locker *redlock.Locker
}

// buildGroups connects to every group's masters. The groups built so far
// are returned with an error, for closing.
func buildGroups(cfg config, specs []groupSpec) ([]quorumGroup, error) {
	if cfg.Dev {
		specs = []groupSpec{{Name: "memory"}}
	}
	groups := make([]quorumGroup, 0, len(specs))
	for _, spec := range specs {
		nodes, err := buildNodes(cfg, spec.Masters)
		if err != nil {
			return groups, err
		}
		addrs := spec.addrs()
		if cfg.Dev {
			addrs = nil
			for _, n := range nodes {
				addrs = append(addrs, n.Addr())
			}
		}
		groups = append(groups, quorumGroup{name: spec.Name, addrs: addrs, nodes: nodes})
		l, err := redlock.New(nodes, redlock.Config{
			NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor, Fencing: cfg.Fencing, FenceRetention: cfg.FenceRetention,
		})
		if err != nil {
			return groups, fmt.Errorf("group %q: %w", spec.Name, err)
		}
		groups[len(groups)-1].locker = l
	}
	return groups, nil
}

func closeGroups(groups []quorumGroup) {
	for _, g := range groups {
		for _, n := range g.nodes {
			_ = n.Close()
		}
	}
}

// allNodes lists every group's masters, one group after another (the
// order health.Config.Groups describes).
func allNodes(groups []quorumGroup) []redlock.Node {
	var nodes []redlock.Node
	for _, g := range groups {
		nodes = append(nodes, g.nodes...)
	}
	return nodes
}

// newLocker is the one group's Locker, or a router over the groups.
func newLocker(groups []quorumGroup, current, previous []groupSpec) (lease.Locker, error) {
	if len(groups) == 1 {
		return groups[0].locker, nil
	}
	byName := map[string]*redlock.Locker{}
	for _, g := range groups {
		byName[g.name] = g.locker
	}
	shardGroups := func(specs []groupSpec) []shard.Group {
		out := make([]shard.Group, len(specs))
		for i, s := range specs {
			out[i] = shard.Group{Name: s.Name, Locker: byName[s.Name]}
		}
		return out
	}
	return shard.New(shardGroups(current), shardGroups(previous))
}

// healthGroups describes the groups to the health checker (nil for one).
func healthGroups(groups []quorumGroup) []health.Group {
	if len(groups) == 1 {
		return nil
	}
	out := make([]health.Group, len(groups))
	for i, g := range groups {
		out[i] = health.Group{Name: g.name, Size: len(g.nodes), Quorum: g.locker.Quorum()}
	}
	return out
}

// setEligible routes the guards' verdict on master i (in allNodes order)
// to its group's Locker.
func setEligible(groups []quorumGroup) func(i int, e redlock.Eligibility) {
	return func(i int, e redlock.Eligibility) {
		for _, g := range groups {
			if i < len(g.nodes) {
				g.locker.SetEligibility(i, e)
				return
			}
			i -= len(g.nodes)
		}
	}
}
