"""promptcache lint: static checks for code that busts prompt caches."""
