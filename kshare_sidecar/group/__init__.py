"""Share-group membership: KIP-848-style epochs, heartbeats, session timeouts, target assignment."""
