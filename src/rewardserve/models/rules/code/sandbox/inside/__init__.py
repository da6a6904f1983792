"""What runs inside the sandbox, sent in as text: the standard library only."""
