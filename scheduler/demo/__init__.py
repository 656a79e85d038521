"""The demo that ``make run`` starts: two tenants, a processor, workers, sample schedules, a live view."""
