"""Foundations every layer may use: errors, files, clock, units, console, settings, worker
processes."""
