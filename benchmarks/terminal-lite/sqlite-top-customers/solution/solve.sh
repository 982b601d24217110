#!/bin/bash
sqlite3 -csv -header /app/shop.db "
  SELECT c.name AS name, printf('%.2f', sum(o.total_cents) / 100.0) AS total
  FROM orders o JOIN customers c ON c.id = o.customer_id
  WHERE o.status IN ('paid', 'shipped')
    AND o.ordered_at >= '2024-01-01' AND o.ordered_at < '2025-01-01'
  GROUP BY c.id
  ORDER BY sum(o.total_cents) DESC
  LIMIT 5" > /app/top_customers.csv
