print("ts")
