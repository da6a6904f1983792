"""Text helpers: chat templates, step splitting, PRM step formats, judge and request templates."""
