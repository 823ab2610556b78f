-- MERCH-1290: acquirer sync upserts on external_id; make it unique so ON CONFLICT works
-- reviewed: a.kowalski, p.nair

CREATE UNIQUE INDEX ux_merchants_external_id ON merchants (external_id);
