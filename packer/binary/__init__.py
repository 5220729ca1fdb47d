"""Binary dumps described by spec files."""
