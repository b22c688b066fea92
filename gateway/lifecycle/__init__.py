"""S3 lifecycle: configuration documents (config), rule matching (rules) and the background
worker that applies them (worker)."""
