"""Ray actor pools: the executor pool (`rollouts`), the judge and expert pools (`roles`), both on the one
actor lifecycle (`base.ActorPool`), and the Ray `Backend` over them (`backend`)."""
