"""What each CLI command does, returning outcomes for the CLI and the service to print."""
