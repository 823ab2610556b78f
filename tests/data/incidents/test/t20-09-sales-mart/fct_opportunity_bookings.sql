-- models/marts/fct_opportunity_bookings.sql  (main @ 3e91c0d, last changed 2024-06-11)
{{ config(materialized='incremental', unique_key='opportunity_id', tags=['revenue']) }}

select
    o.opportunity_id,
    o.account_id,
    o.owner_id,
    o.stage_name,
    o.close_date,
    o.amount * fx.rate_to_usd                         as amount_usd,
    o.stage_name = 'Closed Won'                       as is_won,
    o.stage_name in ('Closed Won', 'Closed Lost')     as is_closed,
    o.last_modified_date                              as updated_at
from {{ ref('stg_salesforce__opportunities') }} o
left join {{ ref('stg_fx_rates') }} fx
  on fx.currency = o.currency_iso_code and fx.rate_date = o.close_date
{% if is_incremental() %}
where o.last_modified_date > (select max(updated_at) from {{ this }})
{% endif %}
