print("wsbridgectl")
