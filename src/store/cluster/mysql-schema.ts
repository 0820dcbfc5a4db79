// The cluster store's MySQL schema as its history of migrations (mysql-records.ts runs the ones a
// database has not had yet, in order).
import { LIFECYCLE_MIGRATIONS } from './mysql-lifecycle.js';

// Append-only: a released migration never changes; new ones go at the end.
export const MIGRATIONS: string[] = [
  `CREATE TABLE IF NOT EXISTS nodes (node_id VARCHAR(128) PRIMARY KEY, record TEXT NOT NULL) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS templates (template_id VARCHAR(128) NOT NULL, node_id VARCHAR(128) NOT NULL, PRIMARY KEY (template_id, node_id)) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS sandbox_history (sandbox_id VARCHAR(64) PRIMARY KEY, node_id VARCHAR(128) NOT NULL, template_id VARCHAR(128) NOT NULL, state VARCHAR(16) NOT NULL,
     record MEDIUMTEXT NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), deleted_at DATETIME(3) NULL, seq BIGINT NOT NULL AUTO_INCREMENT UNIQUE,
     INDEX live (deleted_at, node_id)) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS config_versions (version INT PRIMARY KEY, at VARCHAR(40) NOT NULL, actor VARCHAR(128) NOT NULL, reason TEXT NOT NULL, master MEDIUMTEXT NOT NULL, cubelet MEDIUMTEXT NOT NULL) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS audit (id BIGINT PRIMARY KEY AUTO_INCREMENT, at VARCHAR(40) NOT NULL, actor VARCHAR(128) NOT NULL, action VARCHAR(64) NOT NULL, target VARCHAR(255) NOT NULL,
     outcome TEXT NOT NULL, detail TEXT NULL, INDEX by_actor (actor, id)) ENGINE=InnoDB`,
  // Each control replica numbers the versions of its own config files: two replicas changing
  // theirs at once produce the same number, which must add a row, not replace the other's.
  `ALTER TABLE config_versions DROP PRIMARY KEY, ADD PRIMARY KEY (version, actor)`,
  // Bumped by every write: writers that read a record first write it back only if it did not move.
  `ALTER TABLE sandbox_history ADD COLUMN generation BIGINT NOT NULL DEFAULT 0`,
  // The event history (Redis holds the stream clients read, and loses it when it restarts).
  `CREATE TABLE IF NOT EXISTS events (id BIGINT PRIMARY KEY, body MEDIUMTEXT NOT NULL) ENGINE=InnoDB`,
  // The cluster's config in force: one row, changed only by compare-and-set on its version.
  `CREATE TABLE IF NOT EXISTS config_head (id TINYINT PRIMARY KEY, version INT NOT NULL, at VARCHAR(40) NOT NULL, actor VARCHAR(128) NOT NULL, reason TEXT NOT NULL, master MEDIUMTEXT NOT NULL, cubelet MEDIUMTEXT NOT NULL) ENGINE=InnoDB`,
  // Kept sandbox snapshots (E2B createSnapshot): the data is on the node that took each.
  `CREATE TABLE IF NOT EXISTS snapshots (snapshot_id VARCHAR(64) PRIMARY KEY, node_id VARCHAR(128) NOT NULL, created_at VARCHAR(40) NOT NULL, record MEDIUMTEXT NOT NULL) ENGINE=InnoDB`,
  // Names the compare-and-set that wrote the head, so that a retry knows its own write: version,
  // time and actor do not (one operator's key setting two values through two replicas in the same
  // millisecond gives both commits the same three).
  `ALTER TABLE config_head ADD COLUMN commit_id VARCHAR(36) NOT NULL DEFAULT ''`,
  // The config is one cluster-wide head changed by compare-and-set (config_head), so a version is
  // written once: the history goes back to one row per version. Rows two replicas numbered the
  // same (written before the head) keep the one in force, else the latest. Both steps can run
  // again (a replica stopped between them): the delete finds nothing, the key is rebuilt the same.
  `DELETE v FROM config_versions v JOIN config_versions w ON w.version = v.version AND w.actor <> v.actor
     LEFT JOIN config_head hv ON hv.id = 1 AND hv.version = v.version AND hv.actor = v.actor
     LEFT JOIN config_head hw ON hw.id = 1 AND hw.version = w.version AND hw.actor = w.actor
     WHERE (hw.id IS NOT NULL, w.at, w.actor) > (hv.id IS NOT NULL, v.at, v.actor)`,
  `ALTER TABLE config_versions DROP PRIMARY KEY, ADD PRIMARY KEY (version)`,
  // API keys: the key's SHA-256, never the key; role and quotas in the record.
  `CREATE TABLE IF NOT EXISTS api_keys (id VARCHAR(64) PRIMARY KEY, name VARCHAR(128) NOT NULL UNIQUE, hash CHAR(64) NOT NULL UNIQUE, record TEXT NOT NULL,
     seq BIGINT NOT NULL AUTO_INCREMENT UNIQUE) ENGINE=InnoDB`,
  // The acting key's name as it was when the row was written (keys are renamed and removed).
  `ALTER TABLE audit ADD COLUMN IF NOT EXISTS actor_name VARCHAR(128) NULL`,
  // Tombstones, E2B lifecycle events, webhooks and their deliveries (mysql-lifecycle.ts).
  ...LIFECYCLE_MIGRATIONS,
  // Idempotent creates: `open` is 1 while the claim has no outcome or a failed one (it may be taken over).
  `CREATE TABLE IF NOT EXISTS create_keys (k CHAR(64) PRIMARY KEY, sandbox_id VARCHAR(64) NOT NULL, deadline BIGINT NOT NULL, expires_at BIGINT NOT NULL, outcome TEXT NULL, open TINYINT NOT NULL, INDEX expiry (expires_at)) ENGINE=InnoDB`,
  // Events of the flood kinds (model/event.ts isFloodKind) are kept within their own retention.
  `ALTER TABLE events ADD COLUMN IF NOT EXISTS flood TINYINT NOT NULL DEFAULT 0, ADD INDEX IF NOT EXISTS by_flood (flood, id)`,
  // Volumes (E2B): the data on the node that holds each; names unique per owner ('' for none).
  `CREATE TABLE IF NOT EXISTS volumes (volume_id VARCHAR(64) PRIMARY KEY, owner VARCHAR(128) NOT NULL, name VARCHAR(128) NOT NULL, created_at BIGINT NOT NULL,
     record MEDIUMTEXT NOT NULL, UNIQUE KEY by_name (owner, name)) ENGINE=InnoDB`,
];
