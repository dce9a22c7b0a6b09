"""After promotion: the champion exported, put to work on new reviews, and watched."""
