//! tailtrim-proxy (placeholder; filled in by its issue).
