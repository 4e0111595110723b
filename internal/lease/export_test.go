package lease

import "time"

// SidecarID is the id this Manager leaves its waiter marks under.
func (m *Manager) SidecarID() string { return m.id }

// PassKeysValidity makes this sidecar's keys of the lock name look as a
// sidecar paused past their validity finds them on waking: the validity
// passed, and the renewer has not looked yet.
func (m *Manager) PassKeysValidity(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tenures[name]; ok {
		t.keys.validUntil = time.Now().Add(-time.Millisecond)
	}
}

// Channel is where the masters tell this Manager that another sidecar
// wants one of its locks.
func (m *Manager) Channel() string { return m.channel }

// KnowsOfAWaiterElsewhere tells whether this sidecar's tenure of the lock
// name knows of a waiter of another sidecar (its mark heard).
func (m *Manager) KnowsOfAWaiterElsewhere(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tenures[name]
	return ok && t.remoteKnownLocked(time.Now())
}
