//! tailtrim-store (placeholder; filled in by its issue).
