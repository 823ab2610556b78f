-- models/staging/tillpoint/stg_tillpoint__charges.sql
{{ config(materialized='incremental', unique_key='charge_id') }}

select
    charge_id,
    created_at,
    upper(currency)                         as currency_code,
    amount                                  as amount_cents,      -- Tillpoint sends minor units
    amount_refunded                         as amount_refunded_cents,
    status,
    customer_id,
    _fivetran_synced
from {{ source('tillpoint', 'charges') }}
{% if is_incremental() %}
where _fivetran_synced > (select max(_fivetran_synced) from {{ this }})
{% endif %}
