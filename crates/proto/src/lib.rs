//! tailtrim-proto (placeholder; filled in by its issue).
