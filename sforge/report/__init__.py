"""report.html and its task pages: page models, figures, the pages cache."""
