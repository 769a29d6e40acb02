"""Scheduler filters, registered by name. ``enabled_filters`` in the config picks them and their order.

An unknown name fails at start-up with the list below, so a typo cannot silently
switch a filter off.
"""
