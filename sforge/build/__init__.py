"""Image targets: build, leak check, sentinel, push and pull."""
