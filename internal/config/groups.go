package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// GroupSpec is one quorum group as configured: a name and its masters.
type GroupSpec struct {
	Name    string
	Masters []MasterAddr
}

// Addrs are the group's masters by host:port, the only name they go by.
func (g GroupSpec) Addrs() []string { return HostPorts(g.Masters) }

var groupNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// parseGroups reads "a1:6379,a2:6379,a3:6379;b1:6379,..." where a group may
// be named "east=a1:6379,..." and a master may be a redis:// URL (see
// parseMaster). An unnamed group is named after its masters' host:port
// (sorted and joined with commas), so reordering them, or moving their
// credentials into URLs, moves no lock names; naming groups lets a master
// be replaced without moving any.
func parseGroups(s string) ([]GroupSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var groups []GroupSpec
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

func parseGroup(s string) (GroupSpec, error) {
	var g GroupSpec
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
		g.Name = DefaultGroupName(g.Addrs())
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

// DefaultGroupName is the name of a group given without one: its masters'
// host:port, sorted, joined by ",".
func DefaultGroupName(addrs []string) string {
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	return strings.Join(sorted, ",")
}

// checkGroupSpecs refuses a list in which a name or a master appears
// twice: the groups must be independent of each other too.
func checkGroupSpecs(groups []GroupSpec) error {
	names := map[string]bool{}
	owner := map[string]string{}
	var errs []error
	for _, g := range groups {
		if names[g.Name] {
			errs = append(errs, fmt.Errorf("two groups are named %q", g.Name))
		}
		names[g.Name] = true
		for _, a := range g.Addrs() {
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
func checkMigration(current, previous []GroupSpec) error {
	var errs []error
	byName := map[string]GroupSpec{}
	owner := map[string]string{}
	for _, g := range current {
		byName[g.Name] = g
		for _, a := range g.Addrs() {
			owner[a] = g.Name
		}
	}
	for _, p := range previous {
		if c, ok := byName[p.Name]; ok && DefaultGroupName(c.Addrs()) != DefaultGroupName(p.Addrs()) {
			errs = append(errs, fmt.Errorf("group %q has different masters in the two lists", p.Name))
		}
		for _, a := range p.Addrs() {
			if o, ok := owner[a]; ok && o != p.Name {
				errs = append(errs, fmt.Errorf("master %q is in group %q now and in group %q before", a, o, p.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// UnionGroups is every group the sidecar must talk to: the current ones,
// then those only in the previous list (names leaving them are held there
// too while the migration lasts).
func UnionGroups(current, previous []GroupSpec) []GroupSpec {
	all := slices.Clone(current)
	for _, p := range previous {
		if !slices.ContainsFunc(current, func(c GroupSpec) bool { return c.Name == p.Name }) {
			all = append(all, p)
		}
	}
	return all
}

// Groups returns the quorum groups to lock in, and during a migration the
// list before it (nil otherwise). SIDELOCK_REDIS_ADDRS is one group.
func (c Config) Groups() (current, previous []GroupSpec, err error) {
	current, err = parseGroups(c.RedisGroups)
	if err != nil {
		return nil, nil, fmt.Errorf("SIDELOCK_REDIS_GROUPS: %w", err)
	}
	if len(current) == 0 {
		masters, err := parseMasters(c.RedisAddrs)
		if err != nil {
			return nil, nil, fmt.Errorf("SIDELOCK_REDIS_ADDRS: %w", err)
		}
		current = []GroupSpec{{Name: DefaultGroupName(HostPorts(masters)), Masters: masters}}
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

func (c Config) validateGroups() []error {
	var errs []error
	if err := oneOf(envReadyPolicy, c.ReadyPolicy); err != nil {
		errs = append(errs, err)
	}
	if c.Dev {
		return errs
	}
	current, previous, err := c.Groups()
	if err != nil {
		return append(errs, err)
	}
	// Every entry written is checked, even a previous group's that the
	// current group of its name stands in for.
	var masters []MasterAddr
	for _, g := range slices.Concat(current, previous) {
		masters = append(masters, g.Masters...)
	}
	return append(errs, c.checkMasterSettings(masters)...)
}
