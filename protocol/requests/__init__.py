"""Request bodies: the declaration kit (fields, spec, unsupported rows) and one module per kind."""
