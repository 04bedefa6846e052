//! tailtrim-client (placeholder; filled in by its issue).
