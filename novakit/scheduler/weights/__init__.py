"""Weighers, registered by name. ``weighers = ["all"]`` in the config enables every one of them."""
