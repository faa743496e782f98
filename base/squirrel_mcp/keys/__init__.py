"""The keys: scrypt, the wrapped data key, sealed records, and HKDF-derived keys (`crypto`)."""
