-- The database roles of docs/store.md ("Roles"), for docker-compose.yml's PostgreSQL. Run once,
-- as the superuser, by deploy/compose/postgres-init.sh, which sets the psql variables:
-- :db (the database) and one :<login>_password per login.
--
-- Migration 0005 makes the three roles when they are missing; made here first, every table is
-- owned by nodewright_owner from the first migration on (migrations/env.py sets that role as
-- soon as it exists and may create in the schema).
\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I NOLOGIN', role)
FROM unnest(ARRAY['nodewright_owner', 'nodewright_writer', 'nodewright_reader']) AS role
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role) \gexec

-- The owner role owns the database, and so (PostgreSQL 15 and later) the public schema's rights.
ALTER DATABASE :"db" OWNER TO nodewright_owner;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;

-- One login per user of the database, each a member of one role only.
CREATE ROLE nodewright_migrate LOGIN PASSWORD :'migrate_password' IN ROLE nodewright_owner;
CREATE ROLE nodewright_relay LOGIN PASSWORD :'relay_password' IN ROLE nodewright_writer;
CREATE ROLE nodewright_watcher LOGIN PASSWORD :'watcher_password' IN ROLE nodewright_writer;
CREATE ROLE nodewright_scheduler LOGIN PASSWORD :'scheduler_password' IN ROLE nodewright_writer;
CREATE ROLE nodewright_disruption LOGIN PASSWORD :'disruption_password' IN ROLE nodewright_writer;
CREATE ROLE nodewright_termination LOGIN PASSWORD :'termination_password' IN ROLE nodewright_writer;
CREATE ROLE nodewright_audit LOGIN PASSWORD :'audit_password' IN ROLE nodewright_reader;

GRANT CONNECT ON DATABASE :"db" TO nodewright_owner, nodewright_writer, nodewright_reader;
