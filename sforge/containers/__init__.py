"""The container-engine interface, its Docker implementation and transport, and who owns a
container."""
