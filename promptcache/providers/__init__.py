"""One module per provider: request rendering and usage parsing."""
