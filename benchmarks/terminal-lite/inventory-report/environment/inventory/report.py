"""End-of-day stock report: opening stock plus the day's movements."""
import csv
import sys


def load_stock(path):
    stock = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            stock[row["sku"]] = int(row["qty"])
    return stock


def load_movements(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def apply_movements(stock, movements, levels={}):
    levels.update(stock)
    for m in movements:
        qty = int(m["qty"])
        if m["type"] == "IN":
            levels[m["sku"]] = levels.get(m["sku"], 0) + qty
        elif m["type"] == "OUT":
            levels[m["sku"]] = levels.get(m["sku"], 0) - qty
    return levels


def low_stock(levels, threshold=5):
    return sorted(sku for sku, qty in levels.items() if qty < threshold)


def main(argv):
    stock_path = argv[1] if len(argv) > 1 else "/app/inventory/stock.csv"
    moves_path = argv[2] if len(argv) > 2 else "/app/inventory/movements.csv"
    levels = apply_movements(load_stock(stock_path), load_movements(moves_path))
    for sku in sorted(levels):
        print(f"{sku},{levels[sku]}")
    print("LOW: " + ",".join(low_stock(levels)))


if __name__ == "__main__":
    main(sys.argv)
