-- Runs once when the mysql volume is created (docker-entrypoint-initdb.d),
-- after 10-outbox.sql, which is the outbox table's one definition
-- (schema/mysql.sql). The database "shop" comes from MYSQL_DATABASE.
USE shop;

CREATE TABLE orders (
  id BIGINT AUTO_INCREMENT PRIMARY KEY,
  order_no VARCHAR(32) NOT NULL
) ENGINE=InnoDB;

-- The connector's user: a replica plus read access to the outbox table.
CREATE USER 'cdc'@'%' IDENTIFIED BY 'cdc-quickstart';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%';
GRANT SELECT ON shop.outbox_message TO 'cdc'@'%';
