PRAGMA foreign_keys = ON;
CREATE TABLE users (
  id INTEGER PRIMARY KEY,
  full_name TEXT,
  email TEXT,
  created TEXT
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id),
  amount_cents INTEGER NOT NULL
);
CREATE INDEX orders_user_idx ON orders(user_id);
CREATE VIEW user_totals AS
  SELECT u.id AS id, u.full_name AS name, coalesce(sum(o.amount_cents), 0) AS total
  FROM users u LEFT JOIN orders o ON o.user_id = u.id
  GROUP BY u.id;
INSERT INTO users VALUES
  (1, 'Ada Lovelace', 'ada@example.org', '2023-01-05'),
  (2, 'Bob Stone', 'bob@example.com', '2023-02-11'),
  (3, '  Mary   Ann  Smith ', 'MARY.SMITH@example.com', '2023-02-12'),
  (4, 'Cher', 'cher@example.net', '2023-03-01'),
  (5, 'José García', 'jose@example.es', '2023-03-15'),
  (6, 'Robert Stone', ' Bob@Example.COM ', '2023-04-02'),
  (7, 'Li Wei', 'li.wei@example.cn', '2023-04-20'),
  (8, 'Ada King', 'ADA@example.org', '2023-05-09'),
  (9, 'Jean-Luc Picard', 'jl@example.fr', '2023-06-30'),
  (10, 'Mary Smith', 'mary.smith@example.com', '2023-07-04'),
  (11, 'Ludwig van Beethoven', 'lvb@example.de', '2023-08-18'),
  (12, 'Zed', 'zed@example.org', '2023-09-09');
INSERT INTO orders VALUES
  (100, 1, 1500), (101, 2, 2500), (102, 6, 700), (103, 3, 1200), (104, 10, 800),
  (105, 8, 9900), (106, 5, 450), (107, 6, 300), (108, 9, 12000), (109, 11, 60),
  (110, 7, 5000), (111, 4, 100), (112, 10, 40), (113, 2, 1), (114, 12, 999);
