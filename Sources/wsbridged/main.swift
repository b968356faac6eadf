print("wsbridged: not yet wired")
