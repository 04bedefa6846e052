//! tailtrim-server (placeholder; filled in by its issue).
