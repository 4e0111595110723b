package lease

// SawRemoteHolder reports whether this sidecar's queue for lock name has
// been refused by the masters while none of its own leases held the lock
// (handover.go: its chains of hand-overs then end with a yield).
func (m *Manager) SawRemoteHolder(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q, ok := m.queues[Request{Name: name}.target().queue()]
	return ok && !q.remoteSeen.IsZero()
}
