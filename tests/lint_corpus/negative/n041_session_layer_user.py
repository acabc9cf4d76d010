"""promptcache.build: per-user text in the session layer after static layers."""
import promptcache

SYSTEM = "You are a fitness coach. Suggest safe, progressive workouts."


def plan(user, history: list[dict], question: str):
    return promptcache.build(
        system=SYSTEM,
        session=f"Athlete: {user.name}, level {user.level}",
        messages=history,
        dynamic=question,
    )
