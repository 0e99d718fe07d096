package testenv

import "fmt"

// SeedTableMySQL is the CREATE TABLE of the article's outbox table
// (shared/seed/DIGEST.md) for MySQL/MariaDB, under the given (optionally
// database-qualified) name.
func SeedTableMySQL(name string) string {
	return fmt.Sprintf(`CREATE TABLE %s (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  message_id VARCHAR(64) NOT NULL,
  aggregate_type VARCHAR(64) NOT NULL,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  status TINYINT NOT NULL DEFAULT 0,
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at DATETIME DEFAULT NULL,
  created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  INDEX idx_status_next_retry (status, next_retry_at),
  INDEX idx_aggregate (aggregate_type, aggregate_id),
  UNIQUE KEY uk_message_id (message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`, name)
}

// SeedTablePostgres is the same table for PostgreSQL (JSONB payload), with
// the same two indexes, as separate statements.
func SeedTablePostgres(name string) []string {
	return []string{
		fmt.Sprintf(`CREATE TABLE %s (
  id BIGSERIAL PRIMARY KEY,
  message_id VARCHAR(64) NOT NULL UNIQUE,
  aggregate_type VARCHAR(64) NOT NULL,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSONB NOT NULL,
  status SMALLINT NOT NULL DEFAULT 0,
  retry_count INT NOT NULL DEFAULT 0,
  next_retry_at TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`, name),
		fmt.Sprintf(`CREATE INDEX ON %s (status, next_retry_at)`, name),
		fmt.Sprintf(`CREATE INDEX ON %s (aggregate_type, aggregate_id)`, name),
	}
}
