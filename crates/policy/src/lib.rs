//! tailtrim-policy (placeholder; filled in by its issue).
