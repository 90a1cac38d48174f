"""The command's YAML experiment configs: their schema, overrides and the factories built from them."""
