"""Method adapters, one file each, registered by name with ``@register_method`` (discovered on first use)."""
