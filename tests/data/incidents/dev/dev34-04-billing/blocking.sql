-- who blocks whom on the billing primary
SELECT a.pid, a.usename, a.application_name, a.state, a.wait_event_type,
       l.mode, l.granted, l.relation::regclass AS relation,
       pg_blocking_pids(a.pid) AS blocked_by,
       (now() - a.xact_start)::interval(2) AS xact_age,
       a.query
  FROM pg_stat_activity a
  JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'relation'
 WHERE l.relation IN ('invoices'::regclass, 'invoice_batches'::regclass)
 ORDER BY a.xact_start;
