// The embedded store's SQLite schema as its history of migrations (embedded.ts runs the ones a
// file has not had yet, in order).
import { KEY_MIGRATIONS, KEY_USAGE_MIGRATION } from './embedded-keys.js';
import { LIFECYCLE_MIGRATION } from './embedded-lifecycle.js';

// Append-only list: a migration, once released, never changes; new ones go at the end.
export const MIGRATIONS: string[] = [
  `CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, node_id TEXT NOT NULL, template_id TEXT NOT NULL, record TEXT NOT NULL);
   CREATE INDEX sandboxes_state ON sandboxes(state);
   CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, body TEXT NOT NULL);
   CREATE TABLE config_versions (version INTEGER PRIMARY KEY, at TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, master TEXT NOT NULL, cubelet TEXT NOT NULL);
   CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT);
   CREATE INDEX audit_actor ON audit(actor);
   CREATE TABLE nodes (node_id TEXT PRIMARY KEY, record TEXT NOT NULL);`,
  `ALTER TABLE sandboxes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;`,
  `CREATE TABLE snapshots (id TEXT PRIMARY KEY, node_id TEXT NOT NULL, created_at TEXT NOT NULL, record TEXT NOT NULL);`,
  `CREATE TABLE deleted_sandboxes (id TEXT PRIMARY KEY, at INTEGER NOT NULL);
   CREATE TABLE config_head (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, at TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, master TEXT NOT NULL, cubelet TEXT NOT NULL);
   CREATE TABLE node_templates (template_id TEXT NOT NULL, node_id TEXT NOT NULL, PRIMARY KEY (template_id, node_id));`,
  ...KEY_MIGRATIONS,
  LIFECYCLE_MIGRATION,
  // Idempotent creates: `open` is 1 while the claim has no outcome or a failed one (it may be taken over).
  `CREATE TABLE create_keys (k TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, deadline INTEGER NOT NULL, expires_at INTEGER NOT NULL, outcome TEXT, open INTEGER NOT NULL);`,
  // Events of the flood kinds (model/event.ts isFloodKind) are kept within their own retention.
  `ALTER TABLE events ADD COLUMN flood INTEGER NOT NULL DEFAULT 0;
   CREATE INDEX events_flood ON events(flood, id);`,
  // Volumes (E2B): names unique per owner ('' for none).
  `CREATE TABLE volumes (id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL, record TEXT NOT NULL);
   CREATE UNIQUE INDEX volumes_name ON volumes(owner, name);`,
  KEY_USAGE_MIGRATION,
];
